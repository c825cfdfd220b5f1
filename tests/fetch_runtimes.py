"""Fetches older ONNX Runtime libraries for the multi-runtime test, once.

    python3 tests/fetch_runtimes.py [DEST]   (default: target/test-runtimes)

Downloads the PyPI wheels of onnxruntime 1.20.1 and 1.22.0 (no dependencies),
extracts onnxruntime/capi/libonnxruntime.so.<version>, then ONNX Runtime
1.16.3 (older than the oldest API we support; PyPI wheels before 1.19 do not
ship the library) from the npm package onnxruntime-node, and prints one
library path per line, oldest last. Idempotent: extracted libraries are reused.
"""
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

VERSIONS = ["1.20.1", "1.22.0"]


def publish(path, data):
    """Tests run in parallel and may fetch at once: never expose a half-written library."""
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "target", "test-runtimes")
    os.makedirs(dest, exist_ok=True)
    for v in VERSIONS:
        lib = os.path.join(dest, f"ort-{v}", f"libonnxruntime.so.{v}")
        if not os.path.exists(lib):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                     "--only-binary=:all:", f"onnxruntime=={v}", "-d", tmp],
                    check=True,
                )
                wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
                with zipfile.ZipFile(wheel) as z:
                    member = f"onnxruntime/capi/libonnxruntime.so.{v}"
                    os.makedirs(os.path.dirname(lib), exist_ok=True)
                    publish(lib, z.read(member))
        print(lib)
    old = os.path.join(dest, "ort-1.16.3", "libonnxruntime.so.1.16.3")
    if not os.path.exists(old):
        import tarfile

        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", "--silent", "onnxruntime-node@1.16.3"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
            with tarfile.open(os.path.join(tmp, "onnxruntime-node-1.16.3.tgz")) as t:
                src = t.extractfile("package/bin/napi-v3/linux/x64/libonnxruntime.so.1.16.3")
                os.makedirs(os.path.dirname(old), exist_ok=True)
                publish(old, src.read())
    print(old)


if __name__ == "__main__":
    main()
