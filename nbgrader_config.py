"""nbgrader configuration of the nndebug course.

Instructors write notebooks in `solutions/<assignment>/`; `nbgrader generate_assignment`
turns them into the student versions in `exercises/<assignment>/`. Student work goes to
`submitted/`, grading writes `autograded/`, `feedback/` and `gradebook.db` (all git-ignored).
"""
c = get_config()  # noqa: F821 (injected by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# Only notebooks travel from solutions/ to exercises/ (no stray checkpoints or caches).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".nndebug"]

# Every notebook names the `python3` kernel (the venv's Python, registered by the Makefile's
# set-up); autograde restores the source's kernelspec whatever a submission says.

# Each exercise cell runs in a few seconds on a laptop CPU; a cell still running after this
# many seconds (an endless loop) is interrupted, scores 0, and grading moves on.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# Harmless library chatter on stderr (a UserWarning from torch, say) must not zero a test
# cell: nbgrader scores any stderr output as a failure.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?i)warn"
