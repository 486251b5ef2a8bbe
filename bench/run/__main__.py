"""``python -m bench.run``: bench/run/main.py."""
import sys

from bench.run.main import main

sys.exit(main())
