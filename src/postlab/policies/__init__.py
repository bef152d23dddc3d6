"""Policies: the models that answer, with their tokenizer and decoding step.

``gru`` is the teaching lab's character GRU.
"""
