// The inbox list: rows from the REST API (the same one other clients use),
// "Load more" on the API's cursors, actions per row and in bulk, undo for
// deletes, keyboard use, and live updates that prepend new items without
// moving what the reader is looking at.
//
// Sources: the inbox (/api/v1/inbox/, with category/unread/archived) and the
// announcements (/api/v1/announcements/). The "All" view merges both, newest
// first: each source keeps its own cursor and a buffer, and a row is shown
// only once every source that could still hold something newer has been read
// past it, so paging never repeats or skips.
//
// The search box narrows the view as one types (debounced): the inbox API's
// ``q`` with the view's other filters, paged on its cursors. Announcements
// have no search in their API: in the "All" view they are matched here, on
// the same fields (title and summary).
(function () {
  "use strict";
  var root = document.getElementById("inbox");
  if (!root || !window.mc) { return; }
  var mc = window.mc;
  var _ = mc.gettext;
  var list = document.getElementById("items");
  var template = document.getElementById("row-template");
  var emptyState = document.getElementById("empty");
  var emptySearch = document.getElementById("empty-search");
  var emptySearchTitle = document.getElementById("empty-search-title");
  var searchForm = document.getElementById("search-form");
  var searchInput = document.getElementById("inbox-search");
  var loadMore = document.getElementById("load-more");
  var listError = document.getElementById("list-error");
  var liveRegion = document.getElementById("live-region");
  var toast = document.getElementById("toast");
  var toastText = document.getElementById("toast-text");
  var toastUndo = document.getElementById("toast-undo");
  var selectAll = document.getElementById("select-all");
  var selectedCount = document.getElementById("selected-count");
  var bulkButtons = root.querySelectorAll("[data-bulk]");

  var category = root.getAttribute("data-category");
  var kind = root.getAttribute("data-kind");
  var archived = root.getAttribute("data-archived") === "true";
  var unreadOnly = root.getAttribute("data-unread-only") === "true";
  var limit = parseInt(root.getAttribute("data-limit"), 10) || 20;
  var query = (root.getAttribute("data-query") || "").trim();
  var SEARCH_DELAY_MS = 250;
  var inboxApi = root.getAttribute("data-inbox-api");
  var announcementsApi = root.getAttribute("data-announcements-api");
  var itemUrl = root.getAttribute("data-item-url");
  var announcementUrl = root.getAttribute("data-announcement-url");
  var UNDO_MS = 6000;

  var CATEGORY_NAMES = {
    system: _("System"), promotion: _("Promotion"), transaction: _("Transaction"),
    interaction: _("Interaction"), announcement: _("Announcement")
  };
  // One small icon per category (24x24 outline paths).
  var ICONS = {
    system: "M12 3a6 6 0 0 0-6 6v4l-2 3h16l-2-3V9a6 6 0 0 0-6-6zm-2 15a2 2 0 0 0 4 0",
    promotion: "M4 10h16v10H4zM3 6h18v4H3zM12 6v14M12 6c-2-4-6-3-5 0M12 6c2-4 6-3 5 0",
    transaction: "M3 6h18v12H3zM3 10h18M7 15h4",
    interaction: "M4 5h16v10H9l-5 4z",
    announcement: "M4 10v4h3l8 5V5L7 10zM18 9a4 4 0 0 1 0 6"
  };

  // --- sources -------------------------------------------------------------
  function inboxSource() {
    var params = new URLSearchParams();
    params.set("limit", String(limit));
    if (category) { params.set("category", category); }
    if (unreadOnly) { params.set("unread", "true"); }
    if (archived) { params.set("archived", "true"); }
    if (query) { params.set("q", query); }
    return { name: "inbox", base: inboxApi, params: params, cursor: null, done: false, buffer: [], newest: null };
  }
  function announcementSource() {
    var params = new URLSearchParams();
    params.set("limit", String(limit));
    return { name: "announcement", base: announcementsApi, params: params, cursor: null, done: false, buffer: [], newest: null };
  }
  // Ids read from the API so far (shown or waiting in a buffer): a refresh
  // puts on top only what was never read, not the next page's rows.
  var seen = {};
  var sources = [];
  function buildSources() {
    if (kind === "announcement") { return [announcementSource()]; }
    if (archived || category || kind) { return [inboxSource()]; }
    return [inboxSource(), announcementSource()];
  }
  sources = buildSources();
  // Bumped by each new search: answers of an older one are dropped.
  var generation = 0;
  // Bumped when one of the reader's own marks starts and when it ends. An
  // answer fetched while a mark was on its way may carry read flags older
  // than what the page shows (a poll woken by the mark's own live event, or
  // one that set off just before the mark's request was answered): its flags
  // are not applied, and a poll after the marks have settled brings the
  // server's. ``flagsAt`` is the moment a request sets off; ``flagsHold``
  // tells whether its answer's flags may be applied.
  var marks = 0;
  var marksOut = 0;
  function marking(request) {
    marks += 1;
    marksOut += 1;
    function settled() { marks += 1; marksOut -= 1; }
    return request.then(function (value) { settled(); return value; }, function (error) { settled(); throw error; });
  }
  function flagsAt() { return { marks: marks, calm: marksOut === 0 }; }
  function flagsHold(at) { return at.calm && marks === at.marks; }

  // Rows the reader archived, snoozed or deleted here, each by the count of
  // removals at that moment. An answer that set off before a removal may
  // still list the row (the first page replacing the server's rows, a poll
  // on its way): it is not shown again. An answer that set off after it is
  // the server's word: a snooze that ended comes back. A delete waiting for
  // its undo window hides its rows from every answer until it is sent.
  var removals = 0;
  var removedAt = {};
  function removed(id, pending) {
    removals += 1;
    removedAt[id] = pending ? Infinity : removals;
  }
  function restored(id) { delete removedAt[id]; }
  function outdated(item) { return removedAt[item.id] !== undefined && removedAt[item.id] > item.fetchedAt; }
  // The row a handler was given may have been replaced since (the first page
  // replaces the server's rows): act on the one the list shows.
  function shown(row) { return document.getElementById(row.id) || row; }

  function normalise(source, raw, fetchedAt) {
    if (source.name === "announcement") {
      return {
        id: "a" + raw.id, apiId: raw.id, source: "announcement", kind: "announcement", category: "announcement",
        title: raw.title, summary: raw.summary || "", time: raw.published_at, read: raw.read, pinned: raw.pinned,
        sender: _("System"), fetchedAt: fetchedAt
      };
    }
    return {
      id: "i" + raw.id, apiId: raw.id, source: "inbox", kind: raw.kind, category: raw.category,
      title: raw.title, summary: raw.summary || "", time: raw.created_at, read: raw.read,
      sender: raw.sender || _("System"), actions: raw.actions || [], response: raw.response || null,
      group: raw.group || null, fetchedAt: fetchedAt
    };
  }

  // A grouped row's actors line: the same strings and rule as the pages'
  // (messagecenter/labels.py group_actors_line).
  function groupLine(group) {
    var actors = group.actors || [];
    var others = group.count - actors.length;
    if (!actors.length) {
      return mc.interpolate(mc.ngettext("%(count)s item", "%(count)s items", group.count), {count: mc.number(group.count)}, true);
    }
    var names = (others > 0 ? actors : actors.slice(0, -1)).join(_(", "));
    if (others > 0) {
      return mc.interpolate(mc.ngettext("%(names)s and %(count)s other", "%(names)s and %(count)s others", others),
        {names: names, count: mc.number(others)}, true);
    }
    if (actors.length === 1) { return actors[0]; }
    return mc.interpolate(_("%(names)s and %(last)s"), {names: names, last: actors[actors.length - 1]}, true);
  }

  // Expanding a grouped row lists the group's items (the API's group_key list), once.
  function renderGroup(row, item) {
    var box = row.querySelector(".item-group");
    if (!item.group) { box.remove(); return; }
    box.hidden = false;
    box.querySelector(".group-actors").textContent = groupLine(item.group);
    var details = box.querySelector("details");
    details.querySelector("summary").textContent = mc.interpolate(
      mc.ngettext("%s item in this group", "%s items in this group", item.group.count), [mc.number(item.group.count)]);
    details.addEventListener("toggle", function () {
      if (!details.open || details.getAttribute("data-loaded")) { return; }
      details.setAttribute("data-loaded", "1");
      mc.api("GET", inboxApi + "?group_key=" + encodeURIComponent(item.group.key))
        .then(function (answer) {
          var list = details.querySelector(".group-list");
          answer.data.results.forEach(function (one) {
            var li = document.createElement("li");
            var link = document.createElement("a");
            link.href = itemUrl + one.id + "/";
            link.textContent = one.title;
            li.appendChild(link);
            list.appendChild(li);
          });
        });
    });
  }

  // Case-insensitive containment, as the API's search does for inbox items.
  function matches(item) {
    var needle = query.toLowerCase();
    return item.title.toLowerCase().indexOf(needle) >= 0 || item.summary.toLowerCase().indexOf(needle) >= 0;
  }

  function wanted(item) {
    if (outdated(item)) { return false; }
    if (kind && kind !== "announcement" && item.kind !== kind) { return false; }
    if (unreadOnly && item.read) { return false; }
    if (query && item.source === "announcement" && !matches(item)) { return false; }
    return true;
  }

  function fetchPage(source) {
    var params = new URLSearchParams(source.params);
    if (source.cursor) { params.set("cursor", source.cursor); }
    var fetchedAt = removals;
    return mc.api("GET", source.base + "?" + params.toString()).then(function (answer) {
      var data = answer.data;
      data.results.forEach(function (raw) {
        var item = normalise(source, raw, fetchedAt);
        seen[item.id] = true;
        if (!source.newest || item.time > source.newest) { source.newest = item.time; }
        source.buffer.push(item);
      });
      source.cursor = data.next_cursor;
      source.done = !data.next_cursor;
    });
  }

  // Takes the next row in time order, or null when a source must be read first.
  function takeNext() {
    var best = null;
    for (var i = 0; i < sources.length; i++) {
      var s = sources[i];
      if (!s.buffer.length) {
        if (!s.done) { return null; }
        continue;
      }
      if (!best || Date.parse(s.buffer[0].time) > Date.parse(best.buffer[0].time)) { best = s; }
    }
    return best ? best.buffer.shift() : null;
  }

  var loading = false;
  function exhausted() {
    return sources.every(function (s) { return s.done && !s.buffer.length; });
  }

  // The server's rows (the first page, for readers without JavaScript) give
  // way to this script's first page in one swap.
  var serverRows = true;

  function loadPage() {
    if (loading) { return Promise.resolve(); }
    loading = true;
    loadMore.disabled = true;
    list.setAttribute("aria-busy", "true");
    var shown = 0;
    var rounds = 0;
    var mine = generation;
    var marksAt = flagsAt();
    function step() {
      if (mine !== generation) { return null; }
      var empties = sources.filter(function (s) { return !s.done && !s.buffer.length; });
      if (empties.length) {
        rounds += 1;
        return Promise.all(empties.map(fetchPage)).then(step);
      }
      var item;
      var batch = document.createDocumentFragment();
      // Rows about to be replaced (the server's, or an earlier search's) do not count as shown.
      var taken = {};
      while (shown < limit && (item = takeNext())) {
        if (wanted(item) && !taken[item.id] && (serverRows || !document.getElementById(item.id))) {
          taken[item.id] = true;
          batch.appendChild(renderRow(item));
          shown += 1;
        }
      }
      if (serverRows) {
        serverRows = false;
        list.replaceChildren(batch);
      } else {
        list.appendChild(batch);
      }
      // Kind filters drop rows client-side: read a few more pages to fill one.
      if (shown < limit && !exhausted() && rounds < 5) { return step(); }
      return null;
    }
    // step() answers null when the buffers already hold the page: always a promise here.
    return Promise.resolve().then(step).then(function () {
      if (mine === generation) { listError.hidden = true; }
    }, function (error) {
      if (mine !== generation) { return; }
      listError.textContent = error.message;
      listError.hidden = false;
    }).then(function () {
      // A newer search took over the list (and the loading flag) meanwhile.
      if (mine !== generation) { return; }
      loading = false;
      loadMore.disabled = false;
      loadMore.hidden = exhausted();
      list.setAttribute("aria-busy", "false");
      updateEmpty();
      updateSelection();
      // Rows fetched while the reader marked: their flags come again, current.
      if (!flagsHold(marksAt)) { pollNew(); }
    });
  }

  // --- rows ----------------------------------------------------------------
  // A summary that starts with the title says it twice: show only the rest.
  function distinctSummary(title, summary) {
    var t = title.trim().toLowerCase();
    var s = summary.trim();
    if (!s || s.toLowerCase() === t) { return ""; }
    if (t && s.toLowerCase().indexOf(t) === 0) {
      return s.slice(t.length).replace(/^[\s.:;,!?\-–—。：；，！？]+/, "");
    }
    return s;
  }

  function icon(name) {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("width", "22");
    svg.setAttribute("height", "22");
    var path = document.createElementNS(ns, "path");
    path.setAttribute("d", ICONS[name] || ICONS.system);
    svg.appendChild(path);
    return svg;
  }

  function renderRow(item) {
    var row = template.content.firstElementChild.cloneNode(true);
    row.id = item.id;
    row.tabIndex = -1;
    row.classList.add("js-row");
    row.setAttribute("data-source", item.source);
    row.setAttribute("data-api-id", item.apiId);
    row.setAttribute("data-kind", item.kind);
    row.setAttribute("data-time", item.time);
    row.classList.add("cat-" + item.category);
    var title = row.querySelector(".item-title");
    title.textContent = item.title;
    title.href = item.source === "announcement" ? announcementUrl + item.apiId + "/" : itemUrl + item.apiId + "/";
    row.querySelector(".row-select").setAttribute("aria-label", mc.interpolate(_("Select “%s”"), [item.title]));
    row.querySelector(".item-icon").appendChild(icon(item.category));
    row.querySelector(".item-sender").textContent = item.sender;
    var tag = row.querySelector(".mc-tag");
    tag.textContent = CATEGORY_NAMES[item.category] || item.category;
    if (item.pinned) { tag.textContent += " · " + _("Pinned"); }
    var time = row.querySelector("time");
    time.setAttribute("datetime", item.time);
    var summary = distinctSummary(item.title, item.summary);
    var summaryNode = row.querySelector(".mc-summary");
    if (summary) { summaryNode.textContent = summary; } else { summaryNode.remove(); }
    renderRespond(row, item);
    renderGroup(row, item);
    if (item.source === "announcement" || archived) {
      // Announcements are broadcasts: read state only. Archived rows: unarchive or delete.
      row.querySelector(".snooze").remove();
      if (item.source === "announcement") {
        row.querySelector(".act-archive").remove();
        row.querySelector(".act-delete").remove();
        row.querySelector(".row-select").disabled = true;
        row.querySelector(".row-select").setAttribute("aria-label", _("Announcements cannot be selected"));
      }
    }
    setRead(row, item.read);
    var archive = row.querySelector(".act-archive");
    if (archive) {
      archive.textContent = archived ? _("Unarchive") : _("Archive");
      archive.setAttribute("aria-label", mc.interpolate(archived ? _("Unarchive “%s”") : _("Archive “%s”"), [item.title]));
    }
    var del = row.querySelector(".act-delete");
    if (del) { del.setAttribute("aria-label", mc.interpolate(_("Delete “%s”"), [item.title])); }
    var snooze = row.querySelector(".act-snooze");
    if (snooze) { snooze.setAttribute("aria-label", mc.interpolate(_("Snooze “%s”"), [item.title])); }
    mc.renderTimes(row);
    return row;
  }

  // The answer buttons: a real form (its page URL answers without JavaScript
  // too); a click sends the answer through the API instead.
  function renderRespond(row, item) {
    var box = row.querySelector(".item-respond");
    if (!item.actions || !item.actions.length) { box.remove(); return; }
    box.hidden = false;
    var answered = box.querySelector(".mc-answered");
    var form = box.querySelector(".respond-form");
    if (item.response) {
      var chosen = item.actions.filter(function (a) { return a.id === item.response.action; })[0];
      answered.textContent = mc.interpolate(_("You answered: %s"), [chosen ? chosen.label : item.response.action]);
      answered.setAttribute("data-answered", item.response.action);
      answered.hidden = false;
      form.remove();
      return;
    }
    form.action = itemUrl + encodeURIComponent(item.apiId) + "/respond/";
    form.querySelector(".respond-label").textContent = mc.interpolate(_("Answer “%s”:"), [item.title]);
    item.actions.forEach(function (action) {
      var button = document.createElement("button");
      button.type = "submit";
      button.className = "button";
      button.name = "action";
      button.value = action.id;
      button.textContent = action.label;
      form.appendChild(button);
      form.appendChild(document.createTextNode(" "));
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var button = event.submitter || form.querySelector("button");
      var id = button.value;
      // An answer marks the item read: it counts as one of the reader's marks,
      // so a poll woken on the way does not put back the unread flag.
      marking(mc.api("POST", itemPath(row, "respond"), { action: id })).then(function (answer) {
        item.response = answer.data;
        item.read = true;
        setRead(row, true);
        var fresh = renderRow(item);
        row.replaceWith(fresh);
        announce(mc.interpolate(_("You answered: %s"), [button.textContent]));
        refreshCounts();
      }, fail);
    });
  }

  function setRead(row, read) {
    row.classList.toggle("read", read);
    row.classList.toggle("unread", !read);
    var button = row.querySelector(".act-read");
    var title = row.querySelector(".item-title").textContent;
    button.textContent = read ? _("Mark unread") : _("Mark read");
    button.setAttribute("aria-label", mc.interpolate(read ? _("Mark “%s” unread") : _("Mark “%s” read"), [title]));
    var marker = row.querySelector(".sr-unread");
    if (!read && !marker) {
      marker = document.createElement("span");
      marker.className = "sr-only sr-unread";
      marker.textContent = _("Unread:") + " ";
      row.querySelector(".item-body").insertBefore(marker, row.querySelector(".item-title"));
    } else if (read && marker) {
      marker.remove();
    }
  }

  // This script's rows (the server's stand-ins have no controls).
  function rows() { return Array.prototype.slice.call(list.querySelectorAll(".item.js-row:not([hidden])")); }

  function updateEmpty() {
    var none = rows().length === 0 && exhausted() && listError.hidden;
    emptyState.hidden = !none || Boolean(query);
    if (!emptySearch) { return; }
    emptySearch.hidden = !none || !query;
    if (query) { emptySearchTitle.textContent = mc.interpolate(_("No items match “%s”"), [query]); }
  }

  function announce(text) {
    liveRegion.textContent = "";
    // A fresh text node after a tick is what screen readers notice.
    setTimeout(function () { liveRegion.textContent = text; }, 50);
  }

  function fail(error) {
    announce(error.message);
    listError.textContent = error.message;
    listError.hidden = false;
  }

  function refreshCounts() {
    if (window.mcRefreshCounts) { window.mcRefreshCounts(); }
  }

  // --- actions -------------------------------------------------------------
  function itemPath(row, action) {
    var id = encodeURIComponent(row.getAttribute("data-api-id"));
    var base = row.getAttribute("data-source") === "announcement" ? announcementsApi : inboxApi;
    return base + id + "/" + (action ? action + "/" : "");
  }

  function toggleRead(row, read) {
    if (read === undefined) { read = !row.classList.contains("read"); }
    if (row.classList.contains("read") === read) { return Promise.resolve(); }
    setRead(row, read);
    return marking(mc.api("POST", itemPath(row, read ? "read" : "unread"))).then(function () {
      announce(read ? _("Marked read.") : _("Marked unread."));
      refreshCounts();
    }, function (error) { setRead(row, !read); fail(error); });
  }

  function removeRow(row) {
    // Archived or snoozed here: when it comes back (a snooze ends), it is news.
    delete seen[row.id];
    removed(row.id);
    row = shown(row);
    var next = row.nextElementSibling || row.previousElementSibling;
    row.remove();
    if (next && next.classList.contains("item")) { focusRow(next); }
    updateEmpty();
    updateSelection();
  }

  function archiveRow(row) {
    if (row.getAttribute("data-source") !== "inbox") { return; }
    var action = archived ? "unarchive" : "archive";
    mc.api("POST", itemPath(row, action)).then(function () {
      removeRow(row);
      announce(archived ? _("Moved back to the inbox.") : _("Archived."));
      refreshCounts();
    }, fail);
  }

  // Snooze presets, in the reader's own time zone.
  function snoozeUntil(preset, row) {
    var now = new Date();
    var at = new Date(now.getTime());
    if (preset === "later") {
      at.setHours(at.getHours() + 3, 0, 0, 0);
    } else if (preset === "tomorrow") {
      at.setDate(at.getDate() + 1);
      at.setHours(9, 0, 0, 0);
    } else if (preset === "week") {
      var days = (8 - at.getDay()) % 7 || 7; // next Monday
      at.setDate(at.getDate() + days);
      at.setHours(9, 0, 0, 0);
    } else {
      var value = row.querySelector(".snooze-at").value;
      if (!value) { return null; }
      at = new Date(value);
    }
    return at;
  }

  function snoozeRow(row, preset) {
    var until = snoozeUntil(preset, row);
    if (!until || isNaN(until.getTime())) {
      fail(new Error(_("Choose a time to snooze until.")));
      return;
    }
    mc.api("POST", itemPath(row, "snooze"), { until: until.toISOString() }).then(function () {
      removeRow(row);
      announce(mc.interpolate(_("Snoozed until %s."), [mc.fullTime(until)]));
      refreshCounts();
    }, fail);
  }

  // Deletes wait for the undo window; a page closed meanwhile sends them on its way out.
  var pendingDeletes = [];
  function flushDelete(entry, keepalive) {
    clearTimeout(entry.timer);
    pendingDeletes = pendingDeletes.filter(function (e) { return e !== entry; });
    var request = entry.ids.length === 1
      ? mc.api("DELETE", inboxApi + encodeURIComponent(entry.ids[0]) + "/", undefined, { keepalive: keepalive })
      : mc.api("POST", inboxApi + "bulk/", { action: "delete", ids: entry.ids }, { keepalive: keepalive });
    return request.then(function () {
      entry.rows.forEach(function (r) { removed(r.id); shown(r).remove(); });
      if (toast.getAttribute("data-entry") === String(entry.serial)) { toast.hidden = true; }
      refreshCounts();
    }, function (error) {
      entry.rows.forEach(function (r) { restored(r.id); shown(r).hidden = false; });
      fail(error);
    });
  }

  var serial = 0;
  function deleteRows(selected) {
    selected = selected.filter(function (r) { return r.getAttribute("data-source") === "inbox"; });
    if (!selected.length) { return; }
    var after = selected[selected.length - 1].nextElementSibling;
    selected.forEach(function (r) {
      removed(r.id, true);
      r.hidden = true;
      r.querySelector(".row-select").checked = false;
    });
    if (after && !after.hidden) { focusRow(after); }
    serial += 1;
    var entry = {
      serial: serial,
      ids: selected.map(function (r) { return r.getAttribute("data-api-id"); }),
      rows: selected
    };
    entry.timer = setTimeout(function () { flushDelete(entry, false); }, UNDO_MS);
    pendingDeletes.push(entry);
    toast.setAttribute("data-entry", String(entry.serial));
    toastText.textContent = mc.interpolate(mc.ngettext("Deleted %s item.", "Deleted %s items.", entry.ids.length), [mc.number(entry.ids.length)]);
    toast.hidden = false;
    updateEmpty();
    updateSelection();
  }

  toastUndo.addEventListener("click", function () {
    var id = toast.getAttribute("data-entry");
    var entry = pendingDeletes.filter(function (e) { return String(e.serial) === id; })[0];
    toast.hidden = true;
    if (!entry) { return; }
    clearTimeout(entry.timer);
    pendingDeletes = pendingDeletes.filter(function (e) { return e !== entry; });
    entry.rows.forEach(function (r) { restored(r.id); shown(r).hidden = false; });
    focusRow(shown(entry.rows[0]));
    announce(_("Restored."));
    updateEmpty();
    updateSelection();
  });

  window.addEventListener("pagehide", function () {
    pendingDeletes.slice().forEach(function (entry) { flushDelete(entry, true); });
  });

  // --- selection and bulk --------------------------------------------------
  function selectedRows() {
    return rows().filter(function (r) { return r.querySelector(".row-select").checked; });
  }

  function updateSelection() {
    var selectable = rows().filter(function (r) { return !r.querySelector(".row-select").disabled; });
    var chosen = selectedRows();
    bulkButtons.forEach(function (b) { b.disabled = chosen.length === 0; });
    selectAll.checked = selectable.length > 0 && chosen.length === selectable.length;
    selectAll.indeterminate = chosen.length > 0 && chosen.length < selectable.length;
    selectAll.disabled = selectable.length === 0;
    selectedCount.textContent = chosen.length
      ? mc.interpolate(mc.ngettext("%s selected", "%s selected", chosen.length), [mc.number(chosen.length)])
      : "";
  }

  selectAll.addEventListener("change", function () {
    rows().forEach(function (r) {
      var box = r.querySelector(".row-select");
      if (!box.disabled) { box.checked = selectAll.checked; }
    });
    updateSelection();
  });

  bulkButtons.forEach(function (button) {
    button.addEventListener("click", function () {
      var action = button.getAttribute("data-bulk");
      var chosen = selectedRows();
      if (!chosen.length) { return; }
      if (action === "delete") { deleteRows(chosen); return; }
      var ids = chosen.map(function (r) { return r.getAttribute("data-api-id"); });
      marking(mc.api("POST", inboxApi + "bulk/", { action: action, ids: ids })).then(function (answer) {
        chosen.forEach(function (r) {
          r.querySelector(".row-select").checked = false;
          if (action === "read" || action === "unread") {
            setRead(shown(r), action === "read");
          } else {
            removed(r.id);
            shown(r).remove();
          }
        });
        var done = answer.data ? answer.data.done : ids.length;
        announce(mc.interpolate(mc.ngettext("%s item updated.", "%s items updated.", done), [mc.number(done)]));
        updateEmpty();
        updateSelection();
        refreshCounts();
      }, fail);
    });
  });

  // --- row events ----------------------------------------------------------
  list.addEventListener("change", function (event) {
    if (event.target.classList.contains("row-select")) { updateSelection(); }
  });

  function closeMenus(except) {
    list.querySelectorAll(".snooze-menu:not([hidden])").forEach(function (menu) {
      if (menu === except) { return; }
      menu.hidden = true;
      menu.parentNode.querySelector(".act-snooze").setAttribute("aria-expanded", "false");
    });
  }

  list.addEventListener("click", function (event) {
    var target = event.target.closest("button");
    var row = event.target.closest(".item");
    if (!target || !row) { return; }
    if (target.classList.contains("act-read")) { toggleRead(row); }
    else if (target.classList.contains("act-archive")) { archiveRow(row); }
    else if (target.classList.contains("act-delete")) { deleteRows([row]); }
    else if (target.classList.contains("act-snooze")) {
      var menu = row.querySelector(".snooze-menu");
      closeMenus(menu);
      menu.hidden = !menu.hidden;
      target.setAttribute("aria-expanded", String(!menu.hidden));
      if (!menu.hidden) { menu.querySelector("button").focus(); }
    } else if (target.hasAttribute("data-snooze")) {
      snoozeRow(row, target.getAttribute("data-snooze"));
    }
  });

  document.addEventListener("click", function (event) {
    if (!event.target.closest(".snooze")) { closeMenus(null); }
  });

  // --- keyboard ------------------------------------------------------------
  var current = null;
  function focusRow(row) {
    if (!row) { return; }
    if (current) { current.classList.remove("current"); }
    current = row;
    row.classList.add("current");
    row.focus();
  }

  function move(step) {
    var all = rows();
    if (!all.length) { return; }
    var index = all.indexOf(current);
    var next = index < 0 ? all[0] : all[Math.min(all.length - 1, Math.max(0, index + step))];
    focusRow(next);
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var tag = event.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || event.target.isContentEditable) { return; }
    if (event.key === "Escape") { closeMenus(null); return; }
    var row = current && list.contains(current) && !current.hidden ? current : null;
    var key = event.key;
    if (key === "j") { move(1); }
    else if (key === "k") { move(-1); }
    else if (!row) { return; }
    else if (key === "I" && event.shiftKey) { toggleRead(row, true); }
    else if (key === "u") { toggleRead(row, false); }
    else if (key === "e") { archiveRow(row); }
    else if (key === "#") { deleteRows([row]); }
    else if (key === "x") {
      var box = row.querySelector(".row-select");
      if (!box.disabled) { box.checked = !box.checked; updateSelection(); }
    } else if (key === "Enter" && event.target === row) { row.querySelector(".item-title").click(); }
    else { return; }
    event.preventDefault();
  });

  list.addEventListener("focusin", function (event) {
    var row = event.target.closest(".item");
    if (row && row !== current) {
      if (current) { current.classList.remove("current"); }
      current = row;
      row.classList.add("current");
    }
  });

  // --- mark all read -------------------------------------------------------
  var markAll = document.getElementById("mark-all");
  var dialog = document.getElementById("mark-all-dialog");
  var includeAnnouncements = document.getElementById("mark-all-announcements");

  function markAnnouncementsRead() {
    // Every unread announcement, page by page (they are few; the API has no read-all for them).
    function page(cursor) {
      var url = announcementsApi + "?limit=100" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      return mc.api("GET", url).then(function (answer) {
        var unread = answer.data.results.filter(function (a) { return !a.read; });
        return Promise.all(unread.map(function (a) {
          return mc.api("POST", announcementsApi + encodeURIComponent(a.id) + "/read/");
        })).then(function (done) {
          return answer.data.next_cursor ? page(answer.data.next_cursor).then(function (n) { return n + done.length; }) : done.length;
        });
      });
    }
    return page(null);
  }

  if (markAll && dialog) {
    document.getElementById("mark-all-form").addEventListener("submit", function (event) {
      event.preventDefault();
      dialog.showModal();
    });
    dialog.addEventListener("close", function () {
      if (dialog.returnValue !== "confirm") { return; }
      var body = category ? { category: category } : {};
      var both = includeAnnouncements.checked && !category;
      marking(Promise.all([
        kind === "announcement" ? Promise.resolve({ data: { marked: 0 } }) : mc.api("POST", inboxApi + "read-all/", body),
        both || kind === "announcement" ? markAnnouncementsRead() : Promise.resolve(0)
      ])).then(function (answers) {
        var marked = answers[0].data.marked + answers[1];
        rows().forEach(function (r) {
          if (r.getAttribute("data-source") === "inbox" || both || kind === "announcement") { setRead(r, true); }
        });
        announce(mc.interpolate(mc.ngettext("Marked %s item as read.", "Marked %s items as read.", marked), [mc.number(marked)]));
        refreshCounts();
      }, fail);
    });
  }

  // --- counts --------------------------------------------------------------
  document.addEventListener("mc:counts", function (event) {
    var counts = event.detail;
    var byCategory = counts.by_category || {};
    root.querySelectorAll("[data-count]").forEach(function (node) {
      var key = node.getAttribute("data-count");
      var value = key === "total:" ? counts.total
        : key === "kind:announcement" ? (byCategory.announcement || 0)
        : (byCategory[key.split(":")[1]] || 0);
      node.textContent = mc.number(value);
      node.hidden = value === 0;
      node.setAttribute("aria-label", mc.interpolate(mc.ngettext("%s unread", "%s unread", value), [mc.number(value)]));
    });
    var summary = document.getElementById("inbox-summary");
    if (summary) {
      summary.textContent = mc.interpolate(mc.ngettext("%s unread", "%s unread", counts.total), [mc.number(counts.total)]);
    }
    if (markAll) { markAll.disabled = counts.total === 0; }
  });

  // --- live updates --------------------------------------------------------
  // New items since the newest one shown go above; the rows in view stay put.
  var polling = null;
  var ready = false;
  // Answers when the poll (the one on its way, if any) is done.
  function pollNew() {
    if (polling) { return polling; }
    // Before the first page is in, the first page itself is the news.
    if (archived || !ready) { return Promise.resolve(); }
    var mine = generation;
    var marksAt = flagsAt();
    var fetchedAt = removals;
    // Each source's first page: it holds whatever is new, whatever kind it is
    // (a snoozed item that woke up is there too, though created long ago), and
    // the current read flags of the rows it shares with the page.
    var requests = sources.map(function (source) {
      return mc.api("GET", source.base + "?" + source.params.toString()).then(function (a) {
        return [source, a.data.results];
      });
    });
    polling = Promise.all(requests).then(function (answers) {
      if (mine !== generation) { return; }  // a search replaced the list meanwhile
      var fresh = [];
      answers.forEach(function (pair) {
        pair[1].forEach(function (raw) {
          var item = normalise(pair[0], raw, fetchedAt);
          if (!pair[0].newest || item.time > pair[0].newest) { pair[0].newest = item.time; }
          var known = document.getElementById(item.id);
          if (known) {
            if (flagsHold(marksAt) && known.classList.contains("read") !== item.read) { setRead(known, item.read); }
          } else if (!seen[item.id] && wanted(item)) {
            fresh.push(item);
          }
          seen[item.id] = true;
        });
      });
      if (!fresh.length) { return; }
      // Oldest first, each inserted on top: the newest ends up first. The
      // API's order decides (a woken snooze sits at the top whatever its time).
      if (sources.length > 1) {
        fresh.sort(function (a, b) { return Date.parse(b.time) - Date.parse(a.time); });
      }
      fresh.reverse();
      // Keep the reader's place: measure the first row in view before and after.
      var anchor = rows().filter(function (r) { return r.getBoundingClientRect().bottom > 0; })[0];
      var before = anchor ? anchor.getBoundingClientRect().top : 0;
      fresh.forEach(function (item) {
        var row = renderRow(item);
        row.classList.add("fresh");
        list.insertBefore(row, list.firstChild);
      });
      // Browsers with scroll anchoring have kept it in place already; the
      // others see it move by what was inserted, and get it back here.
      var moved = anchor ? anchor.getBoundingClientRect().top - before : 0;
      if (window.scrollY > 0 && Math.abs(moved) > 1) { window.scrollBy(0, moved); }
      announce(mc.interpolate(mc.ngettext("%s new item", "%s new items", fresh.length), [mc.number(fresh.length)]) +
        ": " + fresh.map(function (i) { return i.title; }).reverse().join(", "));
      updateEmpty();
      updateSelection();
    }).catch(function () {}).then(function () {
      polling = null;
      // A mark that ended meanwhile: its flags come again, current. (One
      // still on its way asks again when it ends: its counts change.)
      if (marks !== marksAt.marks) { pollNew(); }
    });
    return polling;
  }
  document.addEventListener("mc:counts-changed", pollNew);
  document.addEventListener("mc:inbox-changed", pollNew);
  window.mcPollInbox = pollNew;

  // --- search --------------------------------------------------------------
  // A new search text: the list starts over from the first page of the new
  // listing (its rows replace the old ones in one swap), and the address
  // keeps the text so a reload or the back button shows the same search.
  function search(text) {
    text = text.trim();
    if (text === query) { return; }
    query = text;
    generation += 1;
    loading = false;
    seen = {};
    sources = buildSources();
    serverRows = true;
    var url = new URL(window.location.href);
    if (query) { url.searchParams.set("q", query); } else { url.searchParams.delete("q"); }
    window.history.replaceState(null, "", url.toString());
    loadPage().then(function () {
      if (query && !rows().length && exhausted()) { announce(emptySearchTitle.textContent); }
    });
  }

  if (searchForm && searchInput) {
    var searchTimer = null;
    var searchNow = function () {
      clearTimeout(searchTimer);
      search(searchInput.value);
    };
    searchInput.addEventListener("input", function () {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(searchNow, SEARCH_DELAY_MS);
    });
    searchInput.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || !searchInput.value) { return; }
      event.preventDefault();
      searchInput.value = "";
      searchNow();
    });
    // Enter (or the button) searches at once instead of loading a new page.
    searchForm.addEventListener("submit", function (event) {
      event.preventDefault();
      searchNow();
    });
  }
  var clearSearch = document.getElementById("clear-search");
  if (clearSearch && searchInput) {
    clearSearch.addEventListener("click", function (event) {
      event.preventDefault();
      searchInput.value = "";
      search("");
      searchInput.focus();
    });
  }

  loadMore.addEventListener("click", function () { loadPage(); });
  loadPage().then(function () { ready = true; });
})();
