import asyncio

from services.gateway.server import main

asyncio.run(main())
