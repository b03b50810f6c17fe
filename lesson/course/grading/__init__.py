"""Grades an instructor can trust: clean-room verdicts and a class graded in parallel.

`cleanroom.grade_notebook` computes every test cell's verdict outside the student's kernel
(`answers` decides what of a notebook is the student's answer and refuses code that reaches
into the grader; `sandbox` and `child` run the student's code in an isolated process; `wire`
carries plain data back; `budget` bounds a notebook's time). `preprocessor.CleanRoomExecute`
puts it into plain `nbgrader autograde`; `nndebug grade` (`cli`, `engine`, `gradebook`)
grades a whole class on Dask and writes nbgrader's own gradebook. `status` keeps each
submission's status there (ungraded is never a zero), `export` writes it as CSV, `feedback`
leaves the hidden tests out of what students get back, `quiet` silences nbgrader's false
alarms.
"""
