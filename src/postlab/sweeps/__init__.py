"""Sweeps: many plan versions x many seeds, frozen together and compared by seed.

:mod:`~postlab.sweeps.spec` reads a sweep file and expands it into validated plan versions
before anything trains.
"""
