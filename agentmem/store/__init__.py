"""Redis persistence: the session store, its key schema and the embedded Redis launcher."""

from agentmem.store.connection import RedisConnector
from agentmem.store.sessions import SessionHandle, SessionStore, StoreUnavailable, TurnRecord

__all__ = ["RedisConnector", "SessionHandle", "SessionStore", "StoreUnavailable", "TurnRecord"]
