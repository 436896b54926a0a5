"""Admin forms: member lists pasted as text, and the message composer."""

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core.exceptions import ApplicationError
from messagecenter import selectors
from messagecenter.models import CATEGORIES, Bulletin, NotificationRule, UserGroup
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


class BulletinForm(forms.ModelForm):
    class Meta:
        model = Bulletin
        fields = ["title", "body_html", "display_time", "expire_at", "groups"]
        help_texts = {"groups": "Leave empty to show the bulletin to everyone."}


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
    users = UserListField(required=False, help_text="Usernames or ids.")
    groups = forms.ModelMultipleChoiceField(queryset=UserGroup.objects.all(), required=False)
    everyone = forms.BooleanField(required=False)
    expire_at = forms.DateTimeField(required=False, help_text="YYYY-MM-DD HH:MM (UTC)")

    def clean_image_urls(self) -> list[str]:
        urls = [line.strip() for line in (self.cleaned_data.get("image_urls") or "").splitlines() if line.strip()]
        validator = forms.URLField(assume_scheme="https")
        return [validator.clean(url) for url in urls]


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
