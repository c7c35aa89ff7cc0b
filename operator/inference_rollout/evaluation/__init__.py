"""The business evaluation gate's I/O: read the cases, call the Services, score (Principle 11).

:mod:`.cases` parses the ConfigMap's JSONL, :mod:`.scorers` are pure scoring functions, and
:mod:`.runner` sends the cases to the canary's and the stable's Services (OpenAI chat
completions over httpx) and returns an :class:`~.runner.EvaluationResult`.  The decision what a
result means is in :mod:`inference_rollout.core.evaluation_gate`.
"""
