import asyncio

from services.flusher.server import main

asyncio.run(main())
