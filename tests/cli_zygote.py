"""Run many ``calengine`` commands, each in its own process, without paying the imports each time.

A process that has imported calengine and its heavy dependencies (and started no thread) reads one
JSON request per line on stdin, forks, and the child runs the console script's entry point
(:func:`calengine.cli.entry`) with the request's arguments, working directory and file-size limit,
its stdout/stderr in files; the parent answers with the exit code and both outputs.  The child exits
as a real ``calengine`` process does: ``entry`` raises ``SystemExit``, atexit handlers run, and an
uncaught exception prints its traceback.  Used by the hostile-input catalogue, where 26 fresh
interpreters would otherwise spend most of their time importing scikit-learn, pyarrow and Dask.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def _child(request: dict, out_path: str, err_path: str) -> None:
    import atexit
    import resource
    import traceback

    code = 1
    try:
        os.chdir(request["cwd"])
        if request.get("limit_file_size"):
            size = int(request["limit_file_size"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        for fd, path in ((1, out_path), (2, err_path)):
            f = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(f, fd)
            os.close(f)
        sys.argv = ["calengine", *request["args"]]
        from calengine.cli import entry

        try:
            entry()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback and exit 1
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
    finally:
        os._exit(code)


def main() -> None:
    import calengine.model.artifact  # noqa: F401
    import calengine.cli  # noqa: F401
    import calengine.runtime.client  # noqa: F401
    import calengine.fit.table  # noqa: F401
    import calengine.plugins.registry  # noqa: F401
    import calengine.scores.table  # noqa: F401
    import distributed  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import sklearn.naive_bayes  # noqa: F401
    import sklearn.tree  # noqa: F401

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.NamedTemporaryFile(delete=False) as o, tempfile.NamedTemporaryFile(delete=False) as e:
            out_path, err_path = o.name, e.name
        pid = os.fork()
        if pid == 0:
            _child(request, out_path, err_path)
        _, status = os.waitpid(pid, 0)
        with open(out_path) as o, open(err_path) as e:
            answer = {"code": os.waitstatus_to_exitcode(status), "stdout": o.read(), "stderr": e.read()}
        os.unlink(out_path)
        os.unlink(err_path)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
