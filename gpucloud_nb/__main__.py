"""``python -m gpucloud_nb`` runs the ``gpucloud-nb`` command.

    $ python -m gpucloud_nb sandbox --port 0
"""

import sys

from gpucloud_nb.sandbox.cli import main

if __name__ == "__main__":
    sys.exit(main())
