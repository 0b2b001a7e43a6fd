"""An Airflow auth manager with per-DAG read permissions, as the FAB and Keycloak auth managers grant them: the
simple auth manager (its users, passwords and tokens) whose listed users may read only their DAGs. The simple
auth manager alone decides by role, and every role may read every DAG, so it cannot refuse one DAG to a user.

Use: ``AIRFLOW__CORE__AUTH_MANAGER=tests.helpers.auth_manager.DagScopedAuthManager`` and
``DagScopedAuthManager.readable = {"alice": {"dag_a"}}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser


class DagScopedAuthManager(SimpleAuthManager):
    """The simple auth manager, except that a user named in :attr:`readable` may read (GET) only the DAGs listed
    for them, and nothing asked of all DAGs at once (``details`` None); the other users keep its rules."""

    readable: ClassVar[dict[str, set[str]]] = {}  #: user name -> the dag_ids that user may read

    def is_authorized_dag(
        self,
        *,
        method: ResourceMethod,
        user: SimpleAuthManagerUser,
        access_entity: DagAccessEntity | None = None,
        details: DagDetails | None = None,
    ) -> bool:
        if user.get_name() not in self.readable:
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        dag_id = details.id if details is not None else None
        return method == "GET" and dag_id is not None and dag_id in self.readable[user.get_name()]
