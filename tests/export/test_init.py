import subprocess
import sys

import groupquant.export as export


def test_public_api():
    assert callable(export.export_onnx) and callable(export.packed_state_dict)
    assert issubclass(export.ExportError, ValueError)


def test_imports_without_onnx_and_says_how_to_get_it():
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import groupquant.export as e\n"
        "e.packed_state_dict\n"
        "try:\n    e.export_onnx\nexcept ImportError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'groupquant[export]'" in out
