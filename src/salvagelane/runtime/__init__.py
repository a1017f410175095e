"""The runtime: the nodes that fire and run instructions, and what they tell the world.

``service`` (a ``serve`` node: leadership, planning fires, running them), ``scheduler``
(APScheduler), ``dispatch`` (the task queue), ``executor`` (one run), ``delivery`` (the
outbox), ``events`` (the one stream of what happens) and its consumers (``event_log``,
``metrics``). Nothing is imported here: ``salvagelane.runtime.settings`` stays light, so
``serve --help`` loads no scheduler.
"""
