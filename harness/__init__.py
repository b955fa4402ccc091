"""torch-release-bench: the harness every suite uses.

Timing, fingerprint, records, launcher, runner, adapters and the CLI.
"""

import logging

# torch.utils.cpp_extension logs a warning on import on machines without a CUDA toolkit
# ("No CUDA runtime is found"); nothing here builds extensions.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
