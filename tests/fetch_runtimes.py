"""Fetches older ONNX Runtime libraries for the multi-runtime test, once.

    python3 tests/fetch_runtimes.py [DEST]   (default: target/test-runtimes)

Downloads the PyPI wheels of onnxruntime 1.20.1 and 1.22.0 (no dependencies),
extracts onnxruntime/capi/libonnxruntime.so.<version>, and prints one library
path per line. Idempotent: already extracted libraries are reused.
"""
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

VERSIONS = ["1.20.1", "1.22.0"]


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
                    with z.open(member) as src, open(lib, "wb") as out:
                        out.write(src.read())
        print(lib)


if __name__ == "__main__":
    main()
