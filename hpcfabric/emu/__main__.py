import sys

from hpcfabric.emu.process import main

sys.exit(main())
