"""Stop hooks and completion hooks.

``base`` defines the contract every stop check follows (:class:`StopChecker`): when a loop is
about to complete, each checker sees a :class:`StopContext` and may veto the stop.
"""

from loopwarden.hooks.base import StopChecker, StopContext

__all__ = ["StopChecker", "StopContext"]
