"""``python -m bench.cdc``: bench/cdc/relay.py."""
import sys

from bench.cdc.relay import main

sys.exit(main())
