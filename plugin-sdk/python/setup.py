"""Copies the contract's .proto files (../../proto) into the package when it is built,
so an installed package generates its stubs from the protos it was built with."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ("switchyard/plugin/v1/plugin.proto", "grpc/health/v1/health.proto")


class BuildWithProtos(build_py):
    def run(self):
        super().run()
        src_root = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
        dst_root = os.path.join(self.build_lib, "switchyard_plugin", "proto")
        for p in PROTOS:
            src = os.path.join(src_root, p)
            if not os.path.isfile(src):
                raise SystemExit(f"{src} is missing: build the package from a Switchyard checkout")
            os.makedirs(os.path.dirname(os.path.join(dst_root, p)), exist_ok=True)
            shutil.copy2(src, os.path.join(dst_root, p))


setup(cmdclass={"build_py": BuildWithProtos})
