exports.transit = async (input, object) => { object.email = input.email }
