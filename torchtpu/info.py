"""`python -m torchtpu.info`: what serves the tpu device in this process."""
import os
import sys

import torch

import torchtpu
from torchtpu import _C


def collect():
    """Everything info prints, as a dict (raises if the runtime cannot start)."""
    plugin = _C._plugin_info()
    return {
        "torchtpu": torchtpu.__version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "plugin": plugin,
        "devices": _C._devices_info(),
        "cache": dict(zip(("local", "shared", "max_bytes"), _C._cache_dirs())),
        "env": [
            {"name": name, "default": default, "value": os.environ.get(name),
             "meaning": meaning, "stability": stability}
            for name, default, meaning, stability in _C._env_vars()
        ],
    }


def main():
    try:
        info = collect()
    except RuntimeError as e:
        print(f"torchtpu {torchtpu.__version__}: the runtime cannot start:\n  {e}")
        # The plugin itself may still load (GetPjrtApi needs no hardware):
        # say what it is, so a wrong plugin or version shows.
        try:
            p = _C._probe_plugin()
        except RuntimeError as e2:
            print(f"the plugin does not load either:\n  {e2}")
            return 1
        attrs = p["attributes"]
        print(f"plugin:        {p['path']}")
        print(f"PJRT API:      plugin {p['api_version']}, built against {p['header_api_version']}")
        print(f"xla_version:   {attrs.get('xla_version', '?')}")
        for name in sorted(attrs):
            print(f"  {name} = {attrs[name]}")
        return 1
    p = info["plugin"]
    attrs = p["attributes"]
    print(f"torchtpu {info['torchtpu']}  torch {info['torch']}  python {info['python']}")
    print(f"plugin:        {p['path']}")
    print(f"platform:      {p['platform_name']} ({p['platform_version']})")
    print(f"xla_version:   {attrs.get('xla_version', '?')}")
    print(f"stablehlo:     {attrs.get('stablehlo_current_version', '?')} "
          f"(minimum {attrs.get('stablehlo_minimum_version', '?')})")
    print(f"PJRT API:      plugin {p['api_version']}, built against {p['header_api_version']}")
    print(f"devices:       {len(info['devices'])}")
    for d in info["devices"]:
        extra = ", ".join(f"{k}={v}" for k, v in sorted(d["attributes"].items()))
        print(f"  tpu:{d['index']}  id={d['id']} kind={d['kind']}  {d['description']}"
              + (f"  [{extra}]" if extra else ""))
    print(f"lowered ops:   {len(_C._lowerings())} ATen base names in the lowering table")
    c = info["cache"]
    print(f"cache:         local {c['local'] or 'off'}, shared {c['shared'] or 'off'}"
          + (f", cap {c['max_bytes']} bytes each" if c["max_bytes"] > 0 else ""))
    print("environment:")
    for v in info["env"]:
        shown = v["value"] if v["value"] is not None else f"(default: {v['default'] or 'unset'})"
        print(f"  {v['name']} = {shown}")
        print(f"      {v['meaning']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
