"""Acting on stored runs: approving a quarantined item, choosing the definition a stored
run was made with, capturing a run as a regression fixture.

Used by the command line and the review page alike, so the two cannot disagree.
"""
