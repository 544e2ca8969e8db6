"""Builds ltier._ltier against an installed libltier, found through
pkg-config (ltier.pc): LTIER_PREFIX names the install prefix when it is not
on pkg-config's default path. See pyproject.toml for the command."""

import os
import shlex
import subprocess
import sysconfig

from setuptools import Extension, setup


def pkg_config(*args):
    env = dict(os.environ)
    prefix = os.environ.get("LTIER_PREFIX")
    if prefix:
        arch = sysconfig.get_config_var("MULTIARCH") or ""
        dirs = [os.path.join(prefix, d, "pkgconfig")
                for d in ("lib", "lib64", os.path.join("lib", arch))]
        env["PKG_CONFIG_PATH"] = os.pathsep.join(dirs + [env.get("PKG_CONFIG_PATH", "")])
    try:
        out = subprocess.run(["pkg-config", *args, "ltier"], env=env, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("ltier: pkg-config cannot find ltier.pc; install ltier "
                         "(cmake --install) and set LTIER_PREFIX to its prefix") from e
    return shlex.split(out)


here = os.path.dirname(os.path.abspath(__file__))
sources = sorted(os.path.join("src", f) for f in os.listdir(os.path.join(here, "src"))
                 if f.endswith(".cc"))
libdir = pkg_config("--variable=libdir")[0]

setup(ext_modules=[Extension(
    "ltier._ltier",
    sources=sources,
    language="c++",
    extra_compile_args=["-std=c++20", "-fvisibility=hidden", *pkg_config("--cflags")],
    extra_link_args=[*pkg_config("--libs"), f"-Wl,-rpath,{libdir}"],
)])
