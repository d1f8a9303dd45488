import asyncio

from services.timeline.server import main

asyncio.run(main())
