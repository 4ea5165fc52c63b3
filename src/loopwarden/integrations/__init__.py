"""Integrations with other tools: Claude Code and the MCP server."""
