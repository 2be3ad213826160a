"""Experiments over several seeds: the runs (`runs`) and the statistics over them (`stats`)."""
