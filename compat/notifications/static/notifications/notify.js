/* Live notifications: polls the endpoint that register_notify_callbacks names
   and hands each answer to the registered callbacks. The globals keep the
   names django-notifications-hq's script gave them, which pages' own scripts
   use; notify-config.js (the tag's script) sets them. Text only: an item's
   words never become markup. */
var notify_badge_class = "live_notify_badge";
var notify_menu_class = "live_notify_list";
var notify_api_url = "";
var notify_fetch_count = 5;
var notify_unread_url = "";
var notify_mark_all_unread_url = "";
var notify_refresh_period = 15000;
// true: the items fetched are marked read by the endpoint.
var notify_mark_as_read = false;
var consecutive_misfires = 0;
var registered_functions = [];

function fill_notification_badge(data) {
  var badges = document.getElementsByClassName(notify_badge_class);
  for (var i = 0; i < badges.length; i++) {
    badges[i].textContent = data.unread_count;
  }
}

function notification_text(item) {
  var words = [item.actor, item.verb, item.target, item.timestamp];
  return words.filter(function (word) {
    return word !== undefined && word !== null && word !== "";
  }).join(" ");
}

function fill_notification_list(data) {
  var menus = document.getElementsByClassName(notify_menu_class);
  var items = data.unread_list || data.all_list || [];
  for (var i = 0; i < menus.length; i++) {
    var menu = menus[i];
    while (menu.firstChild) {
      menu.removeChild(menu.firstChild);
    }
    items.forEach(function (item) {
      var entry = document.createElement("li");
      entry.textContent = notification_text(item);
      menu.appendChild(entry);
    });
  }
}

function register_notifier(callback) {
  registered_functions.push(callback);
}

// A callback given by name is looked up when data arrives (a page may define
// it after the tag); "a.b" names a function on an object.
function notify_resolve(callback) {
  if (typeof callback === "function") {
    return callback;
  }
  return String(callback).split(".").reduce(function (scope, key) {
    return scope === undefined || scope === null ? undefined : scope[key];
  }, window);
}

function notify_dispatch(data) {
  registered_functions.forEach(function (callback) {
    var handler = notify_resolve(callback);
    if (typeof handler === "function") {
      handler(data);
    }
  });
}

function fetch_api_data() {
  if (registered_functions.length > 0 && notify_api_url) {
    var request = new XMLHttpRequest();
    var query = "?max=" + encodeURIComponent(notify_fetch_count);
    if (notify_mark_as_read) {
      query += "&mark_as_read=true";
    }
    request.addEventListener("readystatechange", function () {
      if (request.readyState !== 4) {
        return;
      }
      if (request.status === 200) {
        consecutive_misfires = 0;
        notify_dispatch(JSON.parse(request.responseText));
      } else {
        consecutive_misfires++;
      }
    });
    request.open("GET", notify_api_url + query, true);
    request.send();
  }
  if (consecutive_misfires < 10) {
    setTimeout(fetch_api_data, notify_refresh_period);
    return;
  }
  // Ten failures in a row: stop polling and say so on the badges.
  var badges = document.getElementsByClassName(notify_badge_class);
  for (var i = 0; i < badges.length; i++) {
    badges[i].textContent = "!";
    // In the page's language when it loads Django's JavaScript catalogue.
    badges[i].title = typeof gettext === "function" ? gettext("Connection lost!") : "Connection lost!";
  }
}

setTimeout(fetch_api_data, 1000);
