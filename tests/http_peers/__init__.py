"""HTTP test peers: the official-SDK server and our fault-injecting server, with fixtures."""
