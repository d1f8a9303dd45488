from services.ingest.server import main
from services.runtime.process import run

run(main)
