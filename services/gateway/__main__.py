from services.gateway.server import main
from services.runtime.process import run

run(main)
