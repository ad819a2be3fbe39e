"""Run folders and how files are written.

``io`` (atomic writers, tables, figures, safe names, input and output path checks),
``manifest`` (what a run read and which options it ran with), ``outputs`` (output folders
checked before the model loads, written beside and published whole), ``checkpointing``
(analyzer states saved during a run and restored on ``--resume``).
"""
