"""Admin forms: member lists pasted as text, bulletins, and the message composer
(recipients picked with the admin's autocomplete, an explicit audience)."""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelectMultiple
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from core.api.errors import ApplicationError
from core.api.translations import translations_validate
from messagecenter import selectors
from messagecenter.models import CATEGORIES, Bulletin, Message, NotificationRule, UserGroup
from messagecenter.services import rule_validate


class UserListField(forms.CharField):
    """Usernames or ids, separated by spaces, commas, semicolons or new lines."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 60})

    def clean(self, value: Any) -> list[int]:
        text = super().clean(value)
        ids, unknown = selectors.users_resolve(text=text or "")
        if unknown:
            raise ValidationError(f"Unknown user(s): {', '.join(unknown)}.")
        return ids


class UserGroupForm(forms.ModelForm):
    add_members = UserListField(required=False, help_text="Paste usernames or user ids to add.")
    remove_members = UserListField(required=False, help_text="Paste usernames or user ids to remove.")

    class Meta:
        model = UserGroup
        fields = ["name"]


class IdAutocompleteSelectMultiple(AutocompleteSelectMultiple):
    """Django's autocomplete widget for integer keys. On a re-shown form it looks
    the submitted values up; a value that is no number (a typed name, a forged
    post) would fail that query, so it is left out: the field's own error says
    it is not a valid choice."""

    def optgroups(self, name: str, value: Any, attrs: Any = None) -> Any:
        return super().optgroups(name, [v for v in value if str(v).isdigit()], attrs)


NO_AUDIENCE = "Choose users, groups or everyone."
EVERYONE_AND_MORE = "Everyone already includes every user: untick it or clear the users and groups."


TRANSLATIONS_HELP = (
    'Optional, JSON: {"zh-hans": {"title": "…", "summary": "…", "body_html": "…"}}; '
    "readers of that language see it, a field left out shows the original."
)


def translations_clean(raw: Any) -> dict[str, Any]:
    """A translations form field checked as the API checks it (a form error otherwise)."""
    try:
        return translations_validate(raw or {})
    except ApplicationError as exc:
        raise ValidationError(exc.message) from exc


class BulletinForm(forms.ModelForm):
    """ "Everyone" is a box of its own: an empty group list is an error here, not a
    silent broadcast. Stored as before (no groups = everyone)."""

    everyone = forms.BooleanField(required=False, help_text="Show the bulletin to every user.")

    class Meta:
        model = Bulletin
        fields = ["title", "body_html", "display_time", "expire_at", "groups", "everyone", "translations"]
        help_texts = {
            "groups": "The groups who see the bulletin; or tick “Everyone”.",
            "translations": TRANSLATIONS_HELP,
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["everyone"].initial = not self.instance.groups.exists()
            # Translations are given with the create (as the API takes them).
            self.fields["translations"].disabled = True

    def clean_translations(self) -> dict[str, Any]:
        return translations_clean(self.cleaned_data.get("translations"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        groups = cleaned.get("groups")
        everyone = cleaned.get("everyone")
        if "groups" in cleaned and not groups and not everyone:
            raise ValidationError("Choose groups or everyone.")
        if groups and everyone:
            raise ValidationError("Everyone already includes every group: untick it or clear the groups.")
        return cleaned


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": "image/*"}))
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)] if data else []


class MessageComposeForm(forms.Form):
    category = forms.ChoiceField(choices=[(c, c.title()) for c in CATEGORIES])
    title = forms.CharField(max_length=200)
    summary = forms.CharField(max_length=300, required=False, help_text="Defaults to the start of the body.")
    body_html = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "cols": 80}), label="Body (HTML)")
    link = forms.URLField(max_length=500, required=False, assume_scheme="https")
    image_urls = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}), required=False, help_text="One image URL per line."
    )
    image_files = MultipleFileField(required=False, label="Upload images")
    # The widgets ask the user and group admins (their search_fields) through the
    # admin's autocomplete view; Message.sender and Message.groups name the remote models.
    users = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("pk"),
        required=False,
        widget=IdAutocompleteSelectMultiple(Message._meta.get_field("sender"), admin.site),
        help_text="Type a username, name or e-mail address.",
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=UserGroup.objects.order_by("name"),
        required=False,
        widget=IdAutocompleteSelectMultiple(Message._meta.get_field("groups"), admin.site),
        help_text="Every member of these groups at send time.",
    )
    everyone = forms.BooleanField(required=False, help_text="Every active user; you confirm the count before it goes.")
    send_at = forms.DateTimeField(
        required=False, label="Send at", help_text="Optional: YYYY-MM-DD HH:MM (UTC). Empty sends now."
    )
    expire_at = forms.DateTimeField(required=False, help_text="YYYY-MM-DD HH:MM (UTC)")
    # One translation per compose: readers of that language see it (core.api.translations).
    translation_language = forms.ChoiceField(
        choices=[("", "None")] + [(c, n) for c, n in settings.LANGUAGES if c != settings.LANGUAGE_CODE],
        required=False,
        label="Translation language",
    )
    # Labels of their own: the original's "Title" and "Body (HTML)" stay unique on the page.
    translation_title = forms.CharField(max_length=200, required=False, label="Translated heading")
    translation_summary = forms.CharField(max_length=300, required=False, label="Translated summary")
    translation_body_html = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}), required=False, label="Translated body"
    )

    def __init__(self, *args: Any, test_send: bool = False, **kwargs: Any) -> None:
        # A test send goes to the operator alone: no audience needed.
        self.test_send = test_send
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        cleaned["translations"] = translations_of(cleaned, self)
        if self.test_send:
            return cleaned
        users, groups, everyone = cleaned.get("users"), cleaned.get("groups"), cleaned.get("everyone")
        if "users" not in cleaned or "groups" not in cleaned:
            return cleaned  # a field error already says what is wrong
        if everyone and (users or groups):
            raise ValidationError(EVERYONE_AND_MORE)
        if not (users or groups or everyone):
            raise ValidationError(NO_AUDIENCE)
        return cleaned

    def clean_image_urls(self) -> list[str]:
        urls = [line.strip() for line in (self.cleaned_data.get("image_urls") or "").splitlines() if line.strip()]
        validator = forms.URLField(assume_scheme="https")
        return [validator.clean(url) for url in urls]


def translations_of(cleaned: dict[str, Any], form: forms.Form) -> dict[str, dict[str, str]]:
    """The compose form's one translation as ``{code: {...}}`` (empty: none), checked as the API checks it."""
    code = cleaned.get("translation_language") or ""
    fields = {
        name: str(cleaned.get(f"translation_{name}") or "")
        for name in ("title", "summary", "body_html")
        if cleaned.get(f"translation_{name}")
    }
    if not code:
        if fields:
            form.add_error("translation_language", "Choose the translation's language.")
        return {}
    try:
        return translations_validate({code: fields})
    except ApplicationError as exc:
        form.add_error("translation_title", exc.message)
        return {}


class NotificationRuleForm(forms.ModelForm):
    """Checks the rule as a whole (model, lookups, scope, templates) before it is saved."""

    class Meta:
        model = NotificationRule
        fields = [
            "name",
            "enabled",
            "content_type",
            "filters",
            "message_type",
            "scope",
            "scope_field",
            "title_template",
            "body_template",
            "ttl_seconds",
            "interval_seconds",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        if cleaned.get("filters") is None:
            cleaned["filters"] = {}
        # The instance is filled in after clean(): check a throwaway copy.
        rule = NotificationRule(**{name: cleaned.get(name) for name in self._meta.fields or ()})
        try:
            rule_validate(rule=rule)
        except ApplicationError as exc:
            raise ValidationError(exc.message) from exc
        return cleaned
