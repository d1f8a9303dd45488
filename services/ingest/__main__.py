import asyncio

from services.ingest.server import main

asyncio.run(main())
