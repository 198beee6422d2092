"""The app's function blueprints; function_app.py registers each one."""
