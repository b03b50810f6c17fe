"""nbgrader configuration of the nndebug course.

Instructors write notebooks in `solutions/<assignment>/`; `nbgrader generate_assignment`
turns them into the student versions in `exercises/<assignment>/`. Student work goes to
`submitted/`, grading writes `autograded/`, `feedback/` and `gradebook.db` (all git-ignored).
"""
import os

c = get_config()  # noqa: F821 (injected by nbgrader)

# this file's folder, absolute (nbgrader warns about a relative root at every step)
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))  # noqa: F821
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

# Verdicts come from the clean room (lesson/course/grading), not from the student's kernel:
# the locked cells and tests run in a fresh trusted process, the student's answers in an
# isolated sandbox, and only plain data crosses. It takes the place of nbgrader's Execute;
# nbgrader's own steps around it are unchanged.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "lesson.course.grading.quiet.OverwriteCells",   # nbgrader's, without its false alarm
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "lesson.course.grading.preprocessor.CleanRoomExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Each exercise cell runs in a few seconds on a laptop CPU; a cell (or one call of a student
# function) still running after this many seconds (an endless loop) is interrupted, scores 0,
# and grading moves on. The sandbox also gets a memory limit.
c.CleanRoomExecute.timeout = 60
c.CleanRoomExecute.memory_mb = 3072
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# Harmless library chatter on stderr (a UserWarning from torch, say) must not zero a test
# cell: nbgrader scores any stderr output as a failure.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?i)warn"

# A submission that could not be graded is recorded as such, never as zeros: the hooks keep
# each submission's status in the gradebook (lesson/course/grading/status.py), and
# `nbgrader export` writes nbgrader's CSV with a status column and no score for it.
c.Autograde.pre_convert_hook = "lesson.course.grading.status.autograde_started"
c.Autograde.post_convert_hook = "lesson.course.grading.status.autograde_finished"
c.ExportApp.plugin_class = "lesson.course.grading.export.StatusCsvExport"

# Feedback shows each test's name, points and message, never a hidden test's lines.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "lesson.course.grading.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# Quiet: autograde prints one line per submission (the status hook) and nbgrader's warnings;
# nbgrader's INFO chatter is off, and SQLAlchemy's deprecations in nbgrader's code ignored.
c.Application.log_level = "WARN"
from lesson.course.grading.quiet import quiet_sqlalchemy  # noqa: E402

quiet_sqlalchemy()
