"""Notifications: tell people when a release rolls back, is promoted, pauses, hits a limit, or
when a drill ends (docs/notifications.md).

The core decides *what* happened (:mod:`inference_rollout.core.notices`); this package formats it
(:mod:`.messages`: a generic JSON webhook and a Slack-compatible message) and delivers it
(:mod:`.delivery`) from a bounded queue outside the reconcile, with retries, to the endpoints a
Secret in the rollout's namespace names.
"""
