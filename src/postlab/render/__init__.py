"""Renderers over computed results: the reference-layout text report (``text``), tables for
terminal, Markdown and JSON (``tables``), figures, the HTML page, and the words of each.
"""
