"""Where tasks run: the one function that picks the Dask client, connecting to a scheduler (TLS), the
version checks of client and workers, the run context the stages share, threads and their native pools, the heap, progress lines and
the run log.

Modules:

* :mod:`.client`: The one place that decides where tasks run.
* :mod:`.connection`: Connecting to a Dask scheduler.
* :mod:`.context`: What the stages of one run share besides its data and options: the run context.
* :mod:`.heap`: Handing freed heap memory back to the operating system when a fragment task ends.
* :mod:`.progress`: Progress lines on a terminal (stderr), silent when output is piped or captured.
* :mod:`.run_log`: What a platform team asks of a batch job.
* :mod:`.thread_client`: Threads of this process behind the part of ``distributed.Client`` that a map over
  chunks uses.
* :mod:`.threads`: Native thread pools pinned to one thread.
* :mod:`.versions`: Client and workers must run the same packages.
"""
