"""factory-boy factories shared by the whole suite."""

from typing import TYPE_CHECKING, Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    if TYPE_CHECKING:
        # factory-boy's call (``UserFactory()``) is untyped; it returns the
        # created user. A __new__ that returns another class is refused (misc)
        # but honoured by mypy, which is all this declaration is for.
        def __new__(cls, *args: Any, **kwargs: Any) -> User: ...  # type: ignore[misc]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", "pass-1234")

    @factory.post_generation
    def _save(obj: User, create: bool, _extracted: Any, **kwargs: Any) -> None:
        if create:
            obj.save()


class StaffFactory(UserFactory):
    is_staff = True


class SuperuserFactory(StaffFactory):
    is_superuser = True
