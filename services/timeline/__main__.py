from services.runtime.process import run
from services.timeline.server import main

run(main)
