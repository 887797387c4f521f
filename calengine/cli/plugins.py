"""``calengine plugins [NAME]``: every plugin with its failures and name clashes, or one learner,
calibrator or combiner's parameters.

A shell over :func:`calengine.plugins.loading.get_plugins` and :func:`calengine.plugins.registry.describe_name`.
"""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("plugins", help="list loaded plugins and failures, or one learner/method/combiner's parameters")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="a learner, calibrator (--method) or combiner name: list its parameters and defaults")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def run(args) -> int:
    """List every plugin, failures and name clashes included (a clash stops every other command, so
    this one must still show what is installed), or describe one registered NAME.

    Strict mode (``--strict-plugins`` / ``CALENGINE_STRICT_PLUGINS=1``) does not hide the listing: this
    is the command that diagnoses plugins, so it always lists them (loaded leniently) and then, if any
    failed, says so in one ``error:`` line and exits 2, as every other command would in strict mode.
    """
    from ..plugins.loading import get_plugins, is_strict

    plugins = get_plugins(strict=False, allow_clashes=True)
    if args.name:
        return _describe(plugins, args.name, args.json)
    records = [r.as_dict() for r in plugins.records]
    if args.json:
        print(json.dumps({"plugins": records, "failures": [r for r in records if r["error"]],
                          "clashes": plugins.clashes}))
    else:
        _print_records(records)
    failed = [f"{r['name']} ({r['distribution']} {r['version']}): {' '.join(str(r['error']).split())[:200]}"
              for r in records if r["error"]]
    if failed and is_strict(None):
        from ..errors import PluginError

        raise PluginError(
            f"strict plugins: {len(failed)} plugin(s) failed to load: {'; '.join(failed)}; fix or uninstall"
            " them, or unset --strict-plugins/CALENGINE_STRICT_PLUGINS"
        )
    return 0


def _print_records(records: list[dict]) -> None:
    for r in records:
        status = "FAILED" if r["error"] else ("CLASH" if r["clashes"] else "ok")
        print(f"{r['name']}  ({r['distribution']} {r['version']})  {status}")
        if r["error"]:
            print(f"    error: {r['error']}")
        for kind, names in r["registered"].items():
            if names:
                print(f"    {kind}: {', '.join(sorted(names))}")
        for clash in r["clashes"]:
            print(f"    clash: {clash}")
    if not records:
        print("no plugins installed (pip install calengine-builtins)")


def _describe(plugins, name: str, as_json: bool) -> int:
    from ..plugins.registry import describe_name

    found = describe_name(name, plugins)
    if as_json:
        print(json.dumps(found if len(found) > 1 else found[0], default=repr))
        return 0
    for d in found:
        if d.get("plugin") is False:  # a method the engine implements (Probing, bagging, MCGrad): where it lives
            print(f"{d['kind']} {d['name']}  (built into calengine, not a plugin)")
            print(f"    {d['summary']}")
            continue
        print(f"{d['kind']} {d['name']}  ({d['distribution']} {d['version']}; {d['class']})")
        if d["summary"]:
            print(f"    {d['summary']}")
        if not d["parameters"]:
            print("    no parameters")
        for p in d["parameters"]:
            print(f"    {p['name']} = {p['default']!r}")
    return 0
