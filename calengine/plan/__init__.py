"""The plan, made in the client from footers and column statistics: the feature encoding, folds and
samples from a row's place, and how much one worker can hold.  It sits between the dataset and
fitting because the graph builders need the whole plan before they make a single task.
"""
