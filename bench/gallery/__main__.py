import sys

from .gallery import main

sys.exit(main())
