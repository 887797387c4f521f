"""The plan, made in the client from footers and column statistics: the feature encoding, folds and
samples from a row's place, and how much one worker can hold.  It sits between the dataset and
fitting because the graph builders need the whole plan before they make a single task.

Modules:

* :mod:`.columns`: Reading named numeric columns as they are.
* :mod:`.features`: Turning table columns into a feature matrix, identically at fit and at scoring time.
* :mod:`.folds`: Cross-validation folds and training samples without a global shuffle.
* :mod:`.memory`: How much one worker can hold.
* :mod:`.options`: The options of a job, checked once, at the door.
"""
