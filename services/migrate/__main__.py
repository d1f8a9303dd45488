import asyncio

from services.migrate.server import main

asyncio.run(main())
