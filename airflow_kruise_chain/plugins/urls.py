"""Where the chain pages are mounted on the API server (the plugin's nav entry and tab name it too)."""

URL_PREFIX = "/kruise-chain"
