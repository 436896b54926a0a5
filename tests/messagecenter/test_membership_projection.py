"""Every way of changing who is in a group reaches Redis right after commit.

Random sequences of membership changes through the manage API, the admin,
the services and the ORM (``group.members`` and ``user.message_groups`` from
either side, membership rows created, moved and deleted, users and groups
deleted with their cascades, changes rolled back in a savepoint, several in
one transaction): after every step each user's group set in Redis equals the
membership rows in PostgreSQL, and each group's bulletin shows in exactly its
members' inboxes. No repair job runs in between.
"""

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from core.redis import keyspace_flush
from messagecenter import selectors, services
from messagecenter.models import Bulletin, UserGroup, UserGroupMembership
from tests.conftest import client_for
from tests.factories import SuperuserFactory, UserFactory
from tests.messagecenter.readmodel_views import user_groups_get

pytestmark = pytest.mark.django_db(transaction=True)

N_USERS = 4
N_GROUPS = 3


class Rollback(Exception):
    """Raised to roll a savepoint back."""


def _admin_form(add: str = "", remove: str = "", name: str = "") -> dict[str, Any]:
    prefix = "memberships"
    return {
        "name": name,
        "add_members": add,
        "remove_members": remove,
        f"{prefix}-TOTAL_FORMS": "0",
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "0",
    }


class MembershipMachine(RuleBasedStateMachine):
    operator: Any = None
    users = Bundle("users")
    groups = Bundle("groups")

    def __init__(self) -> None:
        super().__init__()
        # One example = one fresh world.
        Bulletin.objects.all().delete()
        UserGroup.objects.all().delete()
        get_user_model().objects.filter(username__startswith="member").delete()
        keyspace_flush()
        self.serial = 0
        self.bulletins: dict[int, str] = {}  # group id -> ref of its bulletin
        self.known_users: set[int] = set()  # every user id the example made (deleted ones too)
        self.admin = Client()
        self.admin.force_login(self.operator)

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def _fresh(self, model: Any, obj: Any) -> Any:
        return model.objects.filter(pk=obj.pk).first()

    # --- the pool ------------------------------------------------------------------

    @initialize(target=users)
    def first_users(self) -> Any:
        return multiple(*(self.new_user() for _ in range(N_USERS)))

    @initialize(target=groups)
    def first_groups(self) -> Any:
        return multiple(*(self.new_group() for _ in range(N_GROUPS)))

    @rule(target=users)
    def new_user(self) -> Any:
        user = UserFactory(username=self._name("member"))
        self.known_users.add(user.pk)
        return user

    @rule(target=groups)
    def new_group(self) -> Any:
        group = services.user_group_create(name=self._name("group"))
        bulletin = services.bulletin_create(
            title=f"to {group.name}", body_html="<p>b</p>", display_time=timezone.now(), group_ids=[group.pk]
        )
        self.bulletins[group.pk] = bulletin.ref
        return group

    # --- services and adapters ------------------------------------------------------------

    @rule(group=groups, members=st.lists(users, max_size=3))
    def manage_api_add(self, group: Any, members: list[Any]) -> None:
        live = [u.pk for u in members if self._fresh(get_user_model(), u)]
        if self._fresh(UserGroup, group) and live:
            response = client_for(self.operator).post(
                f"/api/v1/manage/user-groups/{group.pk}/members/", {"user_ids": live}, format="json"
            )
            assert response.status_code == 200, response.content

    @rule(group=groups, members=st.lists(users, max_size=3))
    def manage_api_remove(self, group: Any, members: list[Any]) -> None:
        live = [u.pk for u in members if self._fresh(get_user_model(), u)]
        if self._fresh(UserGroup, group) and live:
            response = client_for(self.operator).delete(
                f"/api/v1/manage/user-groups/{group.pk}/members/", {"user_ids": live}, format="json"
            )
            assert response.status_code == 200, response.content

    @rule(group=groups, add=st.lists(users, max_size=2), remove=st.lists(users, max_size=2))
    def admin_change(self, group: Any, add: list[Any], remove: list[Any]) -> None:
        group = self._fresh(UserGroup, group)
        add = [u for u in add if self._fresh(get_user_model(), u)]
        remove = [u for u in remove if self._fresh(get_user_model(), u)]
        if group is None:
            return
        response = self.admin.post(
            f"/admin/messagecenter/usergroup/{group.pk}/change/",
            _admin_form(
                add=", ".join(str(u.pk) for u in add), remove=", ".join(str(u.pk) for u in remove), name=group.name
            ),
        )
        assert response.status_code == 302, response.content.decode()[:2000]

    # --- the ORM, from both sides ----------------------------------------------------------

    @rule(group=groups, user=users, how=st.sampled_from(["add", "remove"]))
    def orm_members(self, group: Any, user: Any, how: str) -> None:
        group, user = self._fresh(UserGroup, group), self._fresh(get_user_model(), user)
        if group is not None and user is not None:
            getattr(group.members, how)(user)

    @rule(group=groups, user=users, how=st.sampled_from(["add", "remove"]))
    def orm_reverse(self, group: Any, user: Any, how: str) -> None:
        group, user = self._fresh(UserGroup, group), self._fresh(get_user_model(), user)
        if group is not None and user is not None:
            getattr(user.message_groups, how)(group)

    @rule(group=groups)
    def orm_clear(self, group: Any) -> None:
        group = self._fresh(UserGroup, group)
        if group is not None:
            group.members.clear()

    @rule(user=users)
    def orm_reverse_clear(self, user: Any) -> None:
        user = self._fresh(get_user_model(), user)
        if user is not None:
            user.message_groups.clear()

    @rule(group=groups, members=st.lists(users, max_size=3))
    def orm_set(self, group: Any, members: list[Any]) -> None:
        group = self._fresh(UserGroup, group)
        live = [u for u in members if self._fresh(get_user_model(), u)]
        if group is not None:
            group.members.set(live)

    @rule(user=users, chosen=st.lists(groups, max_size=2))
    def orm_reverse_set(self, user: Any, chosen: list[Any]) -> None:
        user = self._fresh(get_user_model(), user)
        live = [g for g in chosen if self._fresh(UserGroup, g)]
        if user is not None:
            user.message_groups.set(live)

    @rule(group=groups, user=users)
    def row_create(self, group: Any, user: Any) -> None:
        group, user = self._fresh(UserGroup, group), self._fresh(get_user_model(), user)
        if group is not None and user is not None:
            UserGroupMembership.objects.get_or_create(group=group, user=user)

    @rule(group=groups, user=users)
    def row_delete(self, group: Any, user: Any) -> None:
        for row in UserGroupMembership.objects.filter(group_id=group.pk, user_id=user.pk):
            row.delete()

    @rule(group=groups)
    def rows_bulk_delete(self, group: Any) -> None:
        UserGroupMembership.objects.filter(group_id=group.pk).delete()

    @rule(group=groups, old=users, new=users)
    def row_moved_to_another_user(self, group: Any, old: Any, new: Any) -> None:
        row = UserGroupMembership.objects.filter(group_id=group.pk, user_id=old.pk).first()
        taken = UserGroupMembership.objects.filter(group_id=group.pk, user_id=new.pk).exists()
        if row is not None and not taken and self._fresh(get_user_model(), new):
            row.user_id = new.pk
            row.save()

    # --- cascades ----------------------------------------------------------------------

    @rule(user=consumes(users), through_admin=st.booleans())
    def delete_user(self, user: Any, through_admin: bool) -> None:
        if not self._fresh(get_user_model(), user):
            return
        if through_admin:
            response = self.admin.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})
            assert response.status_code == 302, response.content.decode()[:2000]
        else:
            get_user_model().objects.filter(pk=user.pk).delete()

    @rule(group=consumes(groups), how=st.sampled_from(["service", "admin", "orm"]))
    def delete_group(self, group: Any, how: str) -> None:
        group = self._fresh(UserGroup, group)
        if group is None:
            return
        if how == "service":
            services.user_group_delete(group=group)
        elif how == "admin":
            response = self.admin.post(f"/admin/messagecenter/usergroup/{group.pk}/delete/", {"post": "yes"})
            assert response.status_code == 302, response.content.decode()[:2000]
        else:
            # Its bulletin (shown to it alone) goes first: a bulletin left with
            # no group would be shown to everyone.
            Bulletin.objects.filter(groups=group).delete()
            group.delete()
        self.bulletins.pop(group.pk, None)

    # --- transactions --------------------------------------------------------------------

    @rule(group=groups, user=users, other=users)
    def rolled_back_savepoint(self, group: Any, user: Any, other: Any) -> None:
        group, user = self._fresh(UserGroup, group), self._fresh(get_user_model(), user)
        other = self._fresh(get_user_model(), other)
        if group is None or user is None or other is None:
            return
        with transaction.atomic():
            group.members.add(user)
            try:
                with transaction.atomic():
                    group.members.remove(user)
                    group.members.add(other)
                    raise Rollback
            except Rollback:
                pass

    @rule(group=groups, user=users)
    def several_in_one_transaction(self, group: Any, user: Any) -> None:
        group, user = self._fresh(UserGroup, group), self._fresh(get_user_model(), user)
        if group is None or user is None:
            return
        with transaction.atomic():
            services.user_group_add_members(group=group, user_ids=[user.pk])
            user.message_groups.remove(group)
            UserGroupMembership.objects.get_or_create(group=group, user=user)

    # --- what must hold after every step -------------------------------------------------------

    @invariant()
    def redis_groups_equal_postgres(self) -> None:
        user_ids = sorted(self.known_users)
        want: dict[int, set[int]] = {u: set() for u in user_ids}
        for user_id, group_id in UserGroupMembership.objects.filter(user_id__in=user_ids).values_list(
            "user_id", "group_id"
        ):
            want[user_id].add(group_id)
        assert user_groups_get(user_ids=user_ids) == want

    @invariant()
    def each_group_bulletin_shows_for_exactly_its_members(self) -> None:
        for user in get_user_model().objects.filter(pk__in=self.known_users):
            groups = set(UserGroupMembership.objects.filter(user=user).values_list("group_id", flat=True))
            want = sorted(ref for group_id, ref in self.bulletins.items() if group_id in groups)
            page = selectors.inbox_list(user=user, limit=50)
            assert sorted(item.id for item in page.results if item.id.startswith("b")) == want, user.username


def test_memberships_reach_redis_however_they_change() -> None:
    MembershipMachine.operator = SuperuserFactory(username="projection-operator")
    run_state_machine_as_test(
        MembershipMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture,
                HealthCheck.filter_too_much,
            ],
        ),
    )
