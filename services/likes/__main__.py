import asyncio

from services.likes.server import main

asyncio.run(main())
