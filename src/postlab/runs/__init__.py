"""Running a plan: orchestration of an engine's tasks on an executor (in-process, worker
processes, Ray), the run folder and resume, progress, the cost estimate made before training,
and ``verify``, which re-evaluates checkpoints and so lives where training is allowed.
"""
