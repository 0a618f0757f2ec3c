"""Stage 03 inside other evaluation harnesses (docs/integrations.md).

- :mod:`chexpercept.integrations.inspect_task`: the ``chexpercept`` inspect_ai task (extra
  ``[inspect]``; the only module that imports inspect_ai at its top);
- :mod:`chexpercept.integrations.inspect_log`: an inspect eval log -> a Stage 03 run folder.
- :mod:`chexpercept.integrations.lmms_eval_task`: the functions of the lmms-eval tasks in
  ``lmms_eval_tasks/chexpercept/`` (extra ``[lmms]``; it imports no lmms-eval itself).
- :mod:`chexpercept.integrations.lmms_eval_samples`: an lmms-eval samples file of those tasks
  -> a Stage 03 run folder.

Nothing is imported here, so ``import chexpercept.integrations`` needs no harness installed.
"""

__all__: list[str] = []
