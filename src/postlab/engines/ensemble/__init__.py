"""The ensemble engine: many members (seeds, arms, plan versions differing in numeric
settings) trained as one batched computation, each with its own counter-based randomness."""
