"""generate-ec: generate versioned SingularityContainer easyconfigs from a YAML spec."""

__version__ = '0.1.0'
