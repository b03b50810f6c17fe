"""The course's face: the `nndebug` command line, the learner loop, the clinic and its report,
the lesson's demo and preflight, and the generated artifacts in outputs/.

The only part of `lesson` that may import the catalogue (`broken_models`).
"""
