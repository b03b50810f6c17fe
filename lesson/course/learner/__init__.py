"""The learner loop: check your exercise notebooks, get hints, watch your progress.

Like rustlings: `nndebug exercises` lists the exercises in order with their status,
`nndebug check NAME` runs one notebook and its visible tests, `nndebug hint NAME` gives one
more hint, `nndebug watch` re-checks the current exercise whenever its notebook is saved.
"""
