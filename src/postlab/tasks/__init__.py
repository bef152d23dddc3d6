"""Tasks and their reward contracts: what is asked, what counts as a right answer.

``arithmetic`` registers the tasks (prompts, answers, the operand pairs splits are drawn
from); ``rows`` is the one type an answer is kept and read as; ``contracts`` registers the
checkers that turn an answer into a reward.
"""
