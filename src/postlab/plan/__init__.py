"""The plan: the frozen experiment rules, written and hashed before anything trains.

``frozen`` holds the teaching plan, its exact bytes, loading and new versions; ``schema`` the
typed, range-checked fields; ``validation`` every problem of a plan, the checks across fields
included (against the registries of tasks, policies and RL options, which sit below it);
``arms`` what each arm trains (a contract, a pipeline); ``hypotheses`` the metrics a
preregistered hypothesis may name.
"""
