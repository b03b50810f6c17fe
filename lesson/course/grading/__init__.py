"""Grades an instructor can trust: clean-room verdicts and a class graded in parallel.

`cleanroom.grade_notebook` computes every test cell's verdict outside the student's kernel
(`answers` decides what of a notebook is the student's answer and refuses code that reaches
into the grader; `sandbox` and `child` run the student's code in an isolated process; `wire`
carries plain data back). `preprocessor.CleanRoomExecute` puts it into plain
`nbgrader autograde`; `nndebug grade` (`cli`, `engine`, `gradebook`) grades a whole class on
Dask and writes nbgrader's own gradebook.
"""
