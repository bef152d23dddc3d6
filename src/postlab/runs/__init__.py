"""Running a plan: orchestration of seeds and arms, worker processes, checkpoints, progress,
the numeric environment a run is pinned to, and the cost estimate made before it starts.
"""
